"""A box, as gpuops reaches it.

The SSH and local transports and the copy protocol (remote), the environment a job gets (boxenv).
Providers hand out boxes; nothing here knows a provider."""
