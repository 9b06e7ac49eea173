"""The host side: collectors read the hardware's own error records and build one report per cycle."""
