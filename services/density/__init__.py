"""Line text density service (Champandard, "The Easy Way to Extract Useful Text from
Arbitrary HTML", 2007)."""
