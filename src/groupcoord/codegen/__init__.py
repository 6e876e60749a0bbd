"""Build-time code generation: JSON message schemas -> Cython codecs + msgspec Structs.

Run by setup.py before cythonize; never at import time of the installed package.
"""
