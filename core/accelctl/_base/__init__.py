"""What every layer may use: text, problems, the project's names, device strings, torch's build.

Torch's build is read without importing torch. Imports nothing of accelctl."""
