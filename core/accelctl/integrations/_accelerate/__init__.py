"""The Accelerate bridge's parts: Accelerate's shared state on the plugin's device."""
