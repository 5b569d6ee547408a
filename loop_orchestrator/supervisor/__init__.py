"""The supervisor: drives every task from pending to integrated."""
