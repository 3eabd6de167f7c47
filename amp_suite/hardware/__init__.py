"""What the device is: the article's capability rule (`capability`, torch-free), the live probe
that feeds it (`probe`), the software environment a record carries, the machine key that decides
which records pool, the published peak table for MFU, and `amp-suite doctor`'s checks."""
