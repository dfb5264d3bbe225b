"""What every layer may use: text, the project's names, device strings, torch's build.

Text for people, the project's own names, device strings, torch's build read without importing it.
Imports nothing of accelctl."""
