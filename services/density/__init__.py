"""Line text density service (seeds 003 and 000)."""
