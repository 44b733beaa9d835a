"""The agent interface above the facade: tools, the MCP server, decision replay, and retention rules
and holds.

Imports the facade and everything below it.
"""
