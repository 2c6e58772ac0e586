"""Numerical kernels shared by the methods and the solvers: thick-restart block Lanczos
(:mod:`dmlfe.linalg.krylov`) on vectors held anywhere.

This layer imports nothing of dmlfe above it, so a method (CCA's principal label
directions) and a solver can both use it.
"""
