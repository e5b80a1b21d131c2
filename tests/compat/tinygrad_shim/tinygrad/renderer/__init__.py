class Renderer: pass
