// Placeholder so CMake configures while this module is written; replaced by its implementation.
