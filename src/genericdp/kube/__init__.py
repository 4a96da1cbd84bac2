"""The Kubernetes API client, for every part that talks to the API server (the DRA
backend, node labels, the DeviceClass reconciler): connections, each request's
deadline, answers bounded as they are read, list-and-watch, leader election on a
Lease. It imports no backend (tests/test_layers.py)."""
