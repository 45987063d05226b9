# Kernel Lab for instructors: JupyterLab on a GPU, the course installed with its CUDA 13 libraries.
#
#   docker build -t kernel-lab .
#   docker run --gpus all -p 8888:8888 -v kernel-lab-work:/home/jovyan kernel-lab
#
# The image holds the course read-only under /opt/kernel-lab. At every start, docker/start-kernel-lab.sh
# puts a working copy in the home directory (~/kernel-lab): course/ is copied without overwriting a file
# that is already there, so a learner's edits live in the mounted volume and never in the image.
# The same image is the single-user image of the JupyterHub deployment in deploy/.
FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04

# Python from Ubuntu, nothing else of the distribution. Its versions are not pinned (DL3008): the base
# image's release fixes them, and a pin would break the build at Ubuntu's next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# A non-root learner with the uid JupyterHub's images use (1000; Ubuntu's own user of that uid goes).
ARG NB_USER=jovyan
ARG NB_UID=1000
RUN userdel --remove ubuntu 2>/dev/null; useradd --create-home --uid "${NB_UID}" --shell /bin/bash "${NB_USER}"

# One virtual environment for the course (Ubuntu's Python refuses system-wide pip installs).
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN python3 -m venv /opt/venv

# The course, with the cu13 extra (CuPy, nvmath-python's cuBLASDx, numba-cuda's CUDA 13 libraries), and
# jupyterhub for the hub's single-user server. Copied first alone so edits to notebooks reuse this layer.
COPY pyproject.toml README.md /opt/kernel-lab/
COPY utilities /opt/kernel-lab/utilities
RUN pip install --no-cache-dir "/opt/kernel-lab[cu13]" "jupyterhub>=5,<6"

COPY course /opt/kernel-lab/course
COPY solutions /opt/kernel-lab/solutions
COPY images /opt/kernel-lab/images
COPY docker/start-kernel-lab.sh /usr/local/bin/start-kernel-lab
RUN chmod 0755 /usr/local/bin/start-kernel-lab && chmod -R a-w /opt/kernel-lab

# The warm cuBLASDx cache: module 06 and 07 kernels generated and compiled at build time, on the build
# machine's CPU (code generation needs no GPU), so that a learner's first compile takes seconds instead
# of minutes (docs/compile-time.md). A few hundred MB per architecture; `--build-arg WARM_ARCH=` skips
# it, `--build-arg WARM_ARCH=sm_90,sm_100` adds Blackwell. Learners read it and write new entries to
# their own cache in the home volume.
ARG WARM_ARCH=sm_90
ENV KERNEL_LAB_WARM_CACHE=/opt/kernel-lab-cache
RUN if [ -n "${WARM_ARCH}" ]; then \
        KERNEL_LAB_CACHE_DIR=/opt/kernel-lab-cache kernel-lab warm --arch "${WARM_ARCH}" \
        && chmod -R a-w /opt/kernel-lab-cache; \
    fi

USER ${NB_UID}
WORKDIR /home/${NB_USER}
ENV KERNEL_LAB_HOME=/home/${NB_USER}/kernel-lab
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/start-kernel-lab"]
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--ServerApp.root_dir=/home/jovyan/kernel-lab", "--LabApp.default_url=/lab/tree/course/00-getting-started/00-getting-started.ipynb"]
