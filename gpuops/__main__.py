from gpuops.cli import main

main()
