"""Ready-made checks for the course's exercises, one module per course module.

Each function takes the learner's launcher, draws inputs, computes the float64 reference and calls
``kernel_lab.check_kernel`` with sizes that catch the classic mistakes of that exercise. They live
here, not in the notebooks, so that tests can feed them deliberately wrong kernels.
"""
