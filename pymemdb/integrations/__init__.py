"""Integrations of pymemdb with agent frameworks (optional extras: ``pip install pymemdb[langgraph]``)."""
