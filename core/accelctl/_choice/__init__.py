"""Device choice: an accelerator and its devices, the distributed backend, the process's place.

The accelerator comes from a name, ``"auto"`` or a plugin. Imports the host and below."""
