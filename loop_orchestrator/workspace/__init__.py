"""The workspace of one run: branches, worktrees, staging, integration and Gate 2."""
