"""Agent sessions: the backend interface, the tmux backend, prompt delivery, the sandbox, and what sessions report."""
