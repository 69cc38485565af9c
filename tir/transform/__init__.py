"""Passes over TIR PrimFuncs: one pure function per file, run in order by ``pipeline``."""
