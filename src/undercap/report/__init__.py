"""Every table, figure and progress bar users see."""
