#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (network allowed at that time).
# It installs the course's environment into /autograder/source/.venv (CPU build of torch: grading needs no GPU).
# Choose a Gradescope base image whose python3 is 3.11 or newer (the course requires Python >= 3.11).
set -euo pipefail
apt-get install -y --no-install-recommends make python3-venv
cd /autograder/source
make env PYTHON=python3 TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
