"""What a container receives, shared by every backend: rendering an allocation
from the compiled templates (``render``), confining what was rendered
(``confine``) and the CDI specs of resources with ``allocate.cdi`` (``cdi``).

No gRPC and no kubelet types here: a backend turns an ``Allocation`` into its
own protocol's answer.
"""
