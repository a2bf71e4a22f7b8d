"""A vision-language model's runtime: its engine process (worker) on mlx-vlm, spoken to as
the chat engine is (engine)."""
