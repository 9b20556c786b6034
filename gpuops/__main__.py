from gpuops.entry import main

main()
