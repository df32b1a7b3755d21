"""The link to SITL: UDP, SITL sessions and the frame grid, and the node's link process."""
