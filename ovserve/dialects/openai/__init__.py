"""OpenAI's APIs (and the OVMS, Azure, Databricks, Jan and MindIE extensions of them)."""
