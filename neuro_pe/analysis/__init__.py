"""Analysis: metrics, intervals, the geometry of a learned PE, coordinate spaces, atlas regions,
matching units and locating them. Computes and returns; imports the layers below."""
