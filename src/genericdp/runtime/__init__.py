"""The daemon at run time: one device plugin per resource, supervised in one
asyncio process (plugins, reconcile, kubelet watch, shutdown)."""
