"""The plan file: its model and validation, the schedule of waves, owned-path globs, signatures of named outputs."""
