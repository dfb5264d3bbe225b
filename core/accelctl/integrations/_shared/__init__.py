"""What the bridges share that uses no framework.

Recorded patches, version windows and the names each bridge uses of its framework, missing
frameworks, parameters kept across a move, sharding, missing kernels in a framework's loop."""
