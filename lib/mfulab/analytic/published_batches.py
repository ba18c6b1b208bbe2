"""Published ranges of the global batch, for the rule that a scenario votes only where its inputs
lie in stated or published ranges (``docs/claims.md``): a batch below the floor is printed beside
a verdict, not voted."""

from __future__ import annotations

# The published floor of the global batch for a 7B–70B model: GPT-3's 6.7B and 13B trained at 2M
# tokens per step (Brown et al. 2020, Table 2.1); Llama 2 took 4M (Touvron et al. 2023, §2.2).
MIN_TOKENS_PER_STEP_7B_70B = 2e6
