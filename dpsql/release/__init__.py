"""Publish once, query forever: DP histograms and synthetic datasets (issue 7).

``histogram`` releases noisy, post-processed cell counts over declared keys or bins;
``synthetic`` releases synthetic rows from privately selected and measured marginals (MST on
Private-PGM). Both read only contribution-bounded counts computed inside PostgreSQL and charge the
privacy ledger before any output is written.
"""
