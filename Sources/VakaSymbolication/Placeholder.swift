public enum VakaSymbolicationPlaceholder {}
