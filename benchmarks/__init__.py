"""inputdp."""
