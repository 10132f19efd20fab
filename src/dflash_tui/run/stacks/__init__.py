"""What a thread is doing, from its stack alone: the class of wait and the place in the program (pure)."""
