"""``luna doctor``: every health check, its result type, and the command that prints them.

Sits beside ``app``: it may import any lower package to probe it, never a front-end.
"""
