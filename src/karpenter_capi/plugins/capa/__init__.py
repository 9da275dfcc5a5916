"""The ``capa`` plugin: real shapes, zones and prices for AWSMachineTemplates (see docs/aws.md)."""
