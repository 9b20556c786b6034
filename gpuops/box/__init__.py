"""The box: SSH and local transports, the on-box agent's laptop side, the detached-job protocol, the bootstrap inputs."""
