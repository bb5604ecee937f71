import Vaka
