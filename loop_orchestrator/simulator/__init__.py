"""The simulator shipped on purpose: a scripted agent and scripted model endpoints that stand in for a model's judgement (lo-orch demo, tests)."""
