"""`python -m bench agentdojo` (issue 24): AgentDojo's suites through the real box. The run is
`bench.dojo.run`; only it, `tasks` and `server` import AgentDojo (the `bench` extra)."""
