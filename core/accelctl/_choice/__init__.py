"""Device choice: an accelerator and its devices, the distributed backend, the process's place.

An accelerator and its devices from a name, ``"auto"`` or a plugin; the distributed backend; where
this process sits among the launched. Imports the host and below."""
