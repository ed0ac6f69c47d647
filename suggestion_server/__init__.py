"""rlscore's suggestion server: POST /suggest scores nodes with the trained policies."""
