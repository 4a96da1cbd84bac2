"""The daemon at run time: one runner per resource, supervised in one asyncio
process, served by a backend it does not know by name (``runtime/backend.py``)."""
