"""LeRobot v3.0 datasets: read (import into a store), write (record with checkpoints and
resume), reject episodes, push to the Hugging Face Hub, and find datasets in the caches.

``numbatraj.lerobot.schema`` is the format's layout (paths, templates, feature dicts); it
needs no optional dependency.
"""
