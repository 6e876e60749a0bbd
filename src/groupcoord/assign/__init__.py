"""The assignment engine: integer units, owner arrays, diff/validate/reconcile kernels and the
assignors, all over numpy arrays (docs/assign.md)."""
