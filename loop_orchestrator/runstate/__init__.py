"""A run on disk: the .orchestration/ layout and ledger, the supervisor's journal, creating a run and Gate 1, the status document."""
