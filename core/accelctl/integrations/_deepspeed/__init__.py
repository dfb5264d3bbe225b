"""The DeepSpeed bridge's parts.

DeepSpeed's accelerator built from the plugin, its op builders, the device each process takes,
``deepspeed.initialize`` on a plugin's device."""
