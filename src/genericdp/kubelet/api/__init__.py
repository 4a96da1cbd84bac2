"""Generated kubelet API stubs (do not edit; ``make protos`` regenerates them)."""
