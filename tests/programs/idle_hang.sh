#!/bin/sh
# A program that prints two steps, then blocks forever without output or CPU (a hung collective,
# a dead data loader): `sleep` stands in for the wait.
echo "step 1 loss 1.00"
echo "step 2 loss 0.90"
exec sleep 3600
