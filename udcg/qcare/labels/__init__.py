"""Q-CARE labels through the judge: query and answer decomposition and the four Yes/No checks."""
