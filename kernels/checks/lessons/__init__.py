"""One module per lesson, ``lNN_<topic>.py``, registering that lesson's exercises (see ../README.md)."""
