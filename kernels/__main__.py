from . import describe

print(describe())
