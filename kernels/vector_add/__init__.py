"""Vector add: the first kernel of the workbook (lesson 00) and the one the PTX exporter compiles."""

from .naive import naive_vector_add
from .reference import reference_vector_add

__all__ = ["naive_vector_add", "reference_vector_add"]
