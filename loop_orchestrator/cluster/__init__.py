"""Sessions on other machines: the Ray session backend (``[cluster] backend = "ray"``).

Ray is an optional dependency (``pip install 'loop-orchestrator[ray]'``): nothing outside
this package imports it, and this package imports it only when a run uses it.
"""
