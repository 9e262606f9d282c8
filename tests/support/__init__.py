"""Test doubles that stand in for services at the network edge (see fake_llm.py)."""
