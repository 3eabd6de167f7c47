"""What the device is: the live probe (`probe`) that applies the article's capability rule
(amp_suite.records.machine, where the machine a record carries is described), the advice that
follows from it (`capability`, torch-free), the software environment a record carries, the
published peak table for MFU, and `amp-suite doctor`'s checks."""
