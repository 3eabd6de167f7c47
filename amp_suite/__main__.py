from amp_suite.cli import main

main()
